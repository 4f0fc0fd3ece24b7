"""Build script: the one thing pyproject.toml cannot say is which packages to ship.

The repository keeps the product's layout (``harness/``, ``reports/``, ``suites/``) and installs it
as one import package, ``speceq``. setuptools' automatic discovery does not follow a renaming
package-dir mapping, so the packages are *discovered* here with ``find_packages`` under each folder
and prefixed with the folder's import name: a new subpackage ships without editing a list.
Everything else (metadata, dependencies, package data) lives in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = {"speceq": "harness", "speceq.reports": "reports", "speceq.suites": "suites"}


def discovered_packages() -> list[str]:
    """Every package under the mapped folders, as its import name (``speceq.pipeline.collect``)."""
    names = []
    for name, folder in FOLDERS.items():
        names.append(name)
        names += [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(names)


setup(packages=discovered_packages(), package_dir=FOLDERS)
