"""`Authorization: Bearer <key>` for the client API: `request_principal`, the one client
authentication, used by the DRF views (BearerKeyAuthentication), the /v1/ views outside
DRF (routing.compat.interactive) and the rate-limit headers (routing.api.throttling)."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import authentication, exceptions, permissions

from routing.accounts.keys import KeyRejected, api_key_authenticate
from routing.models import Account, ApiKey


@dataclass(frozen=True)
class KeyPrincipal:
    """The caller: an account acting through one of its keys."""

    account: Account
    key: ApiKey
    is_authenticated: bool = True


KEYWORD = "Bearer"


def request_principal(request) -> KeyPrincipal | None:
    """The caller of `request` (a Django or DRF request): None without an Authorization
    header; AuthenticationFailed for a header that is not `Bearer <key>` or a key that is
    unknown or revoked."""
    header = authentication.get_authorization_header(request).decode(errors="replace")
    if not header:
        return None
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != KEYWORD.lower():
        raise exceptions.AuthenticationFailed("Send the key as 'Authorization: Bearer <key>'.")
    try:
        key = api_key_authenticate(parts[1])
    except KeyRejected as exc:
        raise exceptions.AuthenticationFailed(str(exc)) from exc
    return KeyPrincipal(account=key.account, key=key)


class BearerKeyAuthentication(authentication.BaseAuthentication):
    keyword = KEYWORD

    def authenticate(self, request):
        principal = request_principal(request)
        return None if principal is None else (principal, principal.key)

    def authenticate_header(self, request):
        return f'{self.keyword} realm="api"'


class HasAccount(permissions.BasePermission):
    message = "An API key is required: 'Authorization: Bearer <key>'."

    def has_permission(self, request, view):
        return isinstance(request.user, KeyPrincipal)
