"""MySQL/MariaDB, a source kind: our own binlog client, table maps, the generated row
transcoder, server checks, and seeding in consistent snapshots. Reached through
``capture/source.py`` by the ``mysql://`` and ``mariadb://`` schemes (``capture.py``)."""
