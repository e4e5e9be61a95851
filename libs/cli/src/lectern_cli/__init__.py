"""The ``lectern`` command line: the embedded stack, migrations, status and dev tokens."""
