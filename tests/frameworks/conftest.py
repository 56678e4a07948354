"""The ``wheel`` fixture of the export and framework tests (``tests/export_cases.py``)."""

from export_cases import wheel  # noqa: F401  the fixture
