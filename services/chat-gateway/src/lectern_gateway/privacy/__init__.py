"""A student's data is theirs: export, erasure and the tenants' session retention."""
