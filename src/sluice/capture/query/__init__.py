"""Query-based capture (``query+sqlite://``, ``query+postgresql://``, ``query+mysql://``):
tables polled with SQL, Kafka Connect JDBC style, for databases whose log Sluice cannot read."""
