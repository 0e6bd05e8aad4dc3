"""Bootstrap: a long-term change log and snapshots built by Spark, served to clients."""
