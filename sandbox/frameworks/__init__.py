"""One folder per GPU framework: its exporter, validator, importer, integration, export table
and pinned key lists (``docs/promotion.md``)."""
