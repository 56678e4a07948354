"""trl: its exporter, validator, importer and integration (``docs/promotion.md``)."""
