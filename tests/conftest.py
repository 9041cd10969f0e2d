"""Every executable any test writes is checked against the JSON Schema in docs/ (format version 2)."""

import json
import os

import pytest

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "..", "docs", "executable.schema.json")


@pytest.fixture(autouse=True, scope="session")
def _executables_match_the_schema():
    import jsonschema
    from tessera.vm.executable import Executable

    with open(SCHEMA_PATH, encoding="utf-8") as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    save = Executable.save

    def checked_save(self, directory):
        save(self, directory)
        with open(os.path.join(directory, "executable.json"), encoding="utf-8") as f:
            errors = sorted(validator.iter_errors(json.load(f)), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path)
            raise AssertionError(f"{directory}/executable.json does not match docs/executable.schema.json at "
                                 f"{where}: {errors[0].message}")

    Executable.save = checked_save
    yield
    Executable.save = save
