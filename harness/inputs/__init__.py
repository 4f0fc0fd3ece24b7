"""What a run is asked to check: cases (a prompt, its sampling parameters and batch context) and cases files."""
