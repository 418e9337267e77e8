"""`Authorization: Bearer <key>` for the client API."""

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


class BearerKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != self.keyword.lower():
            raise exceptions.AuthenticationFailed("Send the key as 'Authorization: Bearer <key>'.")
        try:
            key = api_key_authenticate(parts[1])
        except KeyRejected as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        return KeyPrincipal(account=key.account, key=key), key

    def authenticate_header(self, request):
        return f'{self.keyword} realm="api"'


class HasAccount(permissions.BasePermission):
    message = "An API key is required: 'Authorization: Bearer <key>'."

    def has_permission(self, request, view):
        return isinstance(request.user, KeyPrincipal)
