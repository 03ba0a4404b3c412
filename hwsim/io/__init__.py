"""Writers: run bundles (manifest, Parquet, CSV, PNG)."""
