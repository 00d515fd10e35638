"""Fixtures every test folder can use (each folder's own conftest adds its own)."""

# tests/support/s3_fixtures.py: MinIO; tests/support/kube.py: ``control_plane``, one
# etcd + kube-apiserver for the session.
pytest_plugins = ["tests.support.s3_fixtures", "tests.support.kube"]
