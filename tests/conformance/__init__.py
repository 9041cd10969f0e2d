"""The conformance suite: one set of executables with expected outputs, one adapter per runtime."""
