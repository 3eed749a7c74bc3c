"""The schemas of the tool's rows and tables, kept at the repository's top level and installed
as ``compactor.schemas``: ``spark`` (the Spark pipeline's rows), ``delta`` (the state dir's
Delta tables) and ``report.schema.json`` (the JSON report)."""
