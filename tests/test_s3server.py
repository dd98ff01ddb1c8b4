"""The S3 server launcher of the tests (tests/s3server.py): without weed it fails saying what
to do (never skips), and the server it starts refuses wrong keys like a real store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from s3server import S3Server, S3ServerError, weed_binary


def test_without_weed_and_without_go_it_says_what_to_do(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    os.symlink(bash, bin_dir / "bash")
    monkeypatch.delenv("GPUM_WEED_BIN", raising=False)
    monkeypatch.setenv("GPUM_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.setenv("PATH", str(bin_dir))  # bash, and no Go
    with pytest.raises(S3ServerError, match="Install Go and run `make seaweedfs`") as e:
        weed_binary()
    assert "Go is required to build SeaweedFS" in str(e.value)
    monkeypatch.setenv("GPUM_WEED_BIN", str(tmp_path / "nope"))
    with pytest.raises(S3ServerError, match="is not an executable file"):
        weed_binary()


def test_the_server_refuses_wrong_keys_and_the_reader_cannot_write(s3_server: S3Server
                                                                   ) -> None:
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="t/x", Body=b"1")
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        s3_server.client(s3_server.access_key_id, "wrong").list_objects_v2(
            Bucket=s3_server.bucket)
    reader = s3_server.client(s3_server.reader_access_key_id,
                              s3_server.reader_secret_access_key)
    assert reader.get_object(Bucket=s3_server.bucket, Key="t/x")["Body"].read() == b"1"
    with pytest.raises(ClientError, match="AccessDenied"):
        reader.put_object(Bucket=s3_server.bucket, Key="t/y", Body=b"2")
