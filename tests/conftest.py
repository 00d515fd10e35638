"""Fixtures every test folder can use (each folder's own conftest adds its own)."""

pytest_plugins = ["tests.support.s3_fixtures"]
