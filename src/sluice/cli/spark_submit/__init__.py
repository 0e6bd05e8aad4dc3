"""What ``spark-submit`` runs as ``sluice``: ``sluice_cli.py``, printed by ``sluice spark-entry``.

spark-submit takes a primary resource that does not end in ``.py`` for a JAR, and the
``sluice`` console script does not. The file sits alone in this folder because a script's
folder is the first entry of its ``sys.path``: nothing here may shadow a module.
"""
