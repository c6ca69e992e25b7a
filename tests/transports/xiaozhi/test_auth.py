"""Tokens and handshake identity: the wire format, each refusal reason, header/query handling."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from multidict import CIMultiDict

from vixio.config.xiaozhi import AuthConfig
from vixio.transports.xiaozhi.session.auth import (
    AuthError,
    DeviceAuthenticator,
    DeviceIdentity,
    issue_token,
    parse_bearer,
    verify_token,
)

pytestmark = pytest.mark.unit

SECRET = "s3cret"
CLIENT = "0f3c1a2b-1111-4222-8333-444455556666"
DEVICE = "aa:bb:cc:dd:ee:ff"
NOW = 1_754_611_200.0
TTL = 3600


def test_token_wire_format_is_hmac_of_client_device_timestamp() -> None:
    token = issue_token(SECRET, CLIENT, DEVICE, now=NOW)
    digest = hmac.new(SECRET.encode(), f"{CLIENT}|{DEVICE}|{int(NOW)}".encode(), hashlib.sha256).digest()
    expected = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert token == f"{expected}.{int(NOW)}"
    assert "=" not in token


def test_accepts_a_fresh_token() -> None:
    token = issue_token(SECRET, CLIENT, DEVICE, now=NOW)
    verify_token(SECRET, token, CLIENT, DEVICE, TTL, now=NOW + TTL - 1)


@pytest.mark.parametrize(
    ("secret", "client", "device"),
    [(SECRET, CLIENT, "aa:bb:cc:dd:ee:00"), (SECRET, "other-client", DEVICE), ("other-secret", CLIENT, DEVICE)],
)
def test_rejects_token_for_another_device_client_or_secret(secret: str, client: str, device: str) -> None:
    token = issue_token(SECRET, CLIENT, DEVICE, now=NOW)
    with pytest.raises(AuthError, match="bad signature"):
        verify_token(secret, token, client, device, TTL, now=NOW)


def test_rejects_tampered_signature_and_timestamp() -> None:
    signature, stamp = issue_token(SECRET, CLIENT, DEVICE, now=NOW).split(".")
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    with pytest.raises(AuthError, match="bad signature"):
        verify_token(SECRET, f"{flipped}.{stamp}", CLIENT, DEVICE, TTL, now=NOW)
    # Moving the timestamp forward to extend the lifetime breaks the signature.
    with pytest.raises(AuthError, match="bad signature"):
        verify_token(SECRET, f"{signature}.{int(stamp) + 1000}", CLIENT, DEVICE, TTL, now=NOW)


def test_rejects_expired_token() -> None:
    token = issue_token(SECRET, CLIENT, DEVICE, now=NOW)
    with pytest.raises(AuthError, match="expired"):
        verify_token(SECRET, token, CLIENT, DEVICE, TTL, now=NOW + TTL + 5)


def test_rejects_token_from_the_future_beyond_skew() -> None:
    token = issue_token(SECRET, CLIENT, DEVICE, now=NOW + 3600)
    with pytest.raises(AuthError, match="future"):
        verify_token(SECRET, token, CLIENT, DEVICE, TTL, now=NOW)
    # A few seconds of clock difference is tolerated.
    verify_token(SECRET, issue_token(SECRET, CLIENT, DEVICE, now=NOW + 5), CLIENT, DEVICE, TTL, now=NOW)


@pytest.mark.parametrize("token", ["", "nodot", ".123", "abc.", "abc.12x", "abc.-5", "abc.١٢٣", "abc." + "9" * 40])
def test_rejects_malformed_token(token: str) -> None:
    with pytest.raises(AuthError, match="malformed"):
        verify_token(SECRET, token, CLIENT, DEVICE, TTL, now=NOW)


@pytest.mark.parametrize(
    ("value", "token"),
    [
        (None, ""),
        ("", ""),
        ("Bearer", ""),
        ("Bearer ", ""),
        ("Bearer abc.1", "abc.1"),
        ("bearer  abc.1 ", "abc.1"),
        ("abc.1", "abc.1"),
    ],
)
def test_parse_bearer(value: str | None, token: str) -> None:
    assert parse_bearer(value) == token


def _authenticator(**overrides: object) -> DeviceAuthenticator:
    return DeviceAuthenticator(AuthConfig.model_validate({"enabled": True, "secret": SECRET, **overrides}))


def test_auth_off_reads_identity_without_token() -> None:
    identity = DeviceAuthenticator(AuthConfig()).authenticate(
        {"device-id": "AA:BB:CC:DD:EE:FF", "client-id": CLIENT, "Authorization": "Bearer"}, {}
    )
    assert identity == DeviceIdentity(device_id=DEVICE, client_id=CLIENT, protocol_version=1, token="")
    assert DeviceAuthenticator(AuthConfig()).token_for(CLIENT, DEVICE) == ""


def test_auth_on_accepts_issued_token_from_headers_case_insensitively() -> None:
    authenticator = _authenticator()
    token = authenticator.token_for(CLIENT, DEVICE)
    headers = {"AUTHORIZATION": f"Bearer {token}", "DEVICE-ID": DEVICE, "client-id": CLIENT, "protocol-version": "3"}
    identity = authenticator.authenticate(headers, {})
    assert identity == DeviceIdentity(DEVICE, CLIENT, 3, token)


def test_auth_on_accepts_query_fallbacks_for_browsers() -> None:
    authenticator = _authenticator()
    token = authenticator.token_for(CLIENT, DEVICE)
    query = {"device-id": DEVICE, "client-id": CLIENT, "authorization": f"Bearer {token}"}
    assert authenticator.authenticate(CIMultiDict(), query).token == token


def test_headers_win_over_query() -> None:
    identity = DeviceAuthenticator(AuthConfig()).authenticate(
        CIMultiDict({"Device-Id": DEVICE}), {"device-id": "11:22:33:44:55:66", "client-id": CLIENT}
    )
    assert (identity.device_id, identity.client_id) == (DEVICE, CLIENT)


def test_auth_on_refusals_name_the_reason() -> None:
    authenticator = _authenticator()
    with pytest.raises(AuthError, match="missing Device-Id"):
        authenticator.authenticate({"Client-Id": CLIENT}, {})
    with pytest.raises(AuthError, match="missing bearer token"):
        authenticator.authenticate({"Device-Id": DEVICE, "Client-Id": CLIENT, "Authorization": "Bearer"}, {})
    with pytest.raises(AuthError, match="Protocol-Version"):
        authenticator.authenticate({"Device-Id": DEVICE, "Protocol-Version": "two"}, {})
    other = issue_token(SECRET, CLIENT, "11:22:33:44:55:66")
    with pytest.raises(AuthError, match="bad signature"):
        authenticator.authenticate({"Device-Id": DEVICE, "Client-Id": CLIENT, "Authorization": f"Bearer {other}"}, {})


def test_expired_token_is_refused_at_handshake() -> None:
    authenticator = _authenticator(token_ttl=60)
    stale = issue_token(SECRET, CLIENT, DEVICE, now=NOW)
    with pytest.raises(AuthError, match="expired"):
        authenticator.authenticate({"Device-Id": DEVICE, "Client-Id": CLIENT, "Authorization": f"Bearer {stale}"}, {})


def test_allow_listed_device_connects_without_token_and_gets_none() -> None:
    authenticator = _authenticator(allowed_devices=["AA:BB:CC:DD:EE:FF"])
    assert authenticator.token_for(CLIENT, DEVICE) == ""
    assert authenticator.authenticate({"Device-Id": DEVICE}, {}).device_id == DEVICE
    with pytest.raises(AuthError):
        authenticator.authenticate({"Device-Id": "11:22:33:44:55:66", "Client-Id": CLIENT}, {})
