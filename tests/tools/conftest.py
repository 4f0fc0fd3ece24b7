"""Fixtures of the bundled-model tests, shared with the other folder that needs them."""

from bundled_fixtures import draft, offline, target  # noqa: F401
