"""A keyring backend for the tests (PYTHON_KEYRING_BACKEND=tests.keyring_backend.FileKeyring):
the same interface as the OS keyrings, kept in the JSON file FLUD_TEST_KEYRING names."""
import json
import os

from keyring.backend import KeyringBackend


class FileKeyring(KeyringBackend):
    priority = 1

    def _load(self) -> dict:
        try:
            with open(os.environ["FLUD_TEST_KEYRING"]) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def get_password(self, service, username):
        return self._load().get(f"{service}/{username}")

    def set_password(self, service, username, password):
        data = self._load()
        data[f"{service}/{username}"] = password
        with open(os.environ["FLUD_TEST_KEYRING"], "w") as f:
            json.dump(data, f)

    def delete_password(self, service, username):
        data = self._load()
        data.pop(f"{service}/{username}", None)
        with open(os.environ["FLUD_TEST_KEYRING"], "w") as f:
            json.dump(data, f)
