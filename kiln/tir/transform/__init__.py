"""Passes over the loop IR: each is a function `pass(stmt_or_primfunc) -> same kind`."""
