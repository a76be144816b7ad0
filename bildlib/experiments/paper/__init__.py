"""The paper presets exercised offline: their checkpoints' shapes (shapes), datasets in the
hub's schema (fixtures), and the dry run of every notebook on them (dryrun)."""
