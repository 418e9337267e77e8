"""Staff two-factor authentication for the admin (issue 30): a TOTP code after the
password, required of every staff user when settings.ADMIN_REQUIRE_2FA is on (the
default with DEBUG off; off for `make run`'s demo). django-otp keeps the devices (a TOTP
authenticator app, static backup codes); this module is the admin site that asks for a
code, and the enrol / backup-codes / reset rules the `staff_2fa` command runs.

Enrolment is out of band (an operator's shell: `manage.py staff_2fa enrol NAME`), never
a page a password alone reaches: a stolen password must not be enough to register the
thief's authenticator. A wrong code counts toward django-axes' lockout like a wrong
password (the same username and address pair, the same limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django.db import transaction
from django_otp import devices_for_user
from django_otp.forms import OTPAuthenticationFormMixin
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

ENROL_COMMAND = "python manage.py staff_2fa enrol <username>"
BACKUP_DEVICE_NAME = "backup codes"


def two_factor_required() -> bool:
    return bool(getattr(settings, "ADMIN_REQUIRE_2FA", False))


class StaffLoginForm(OTPAuthenticationFormMixin, AdminAuthenticationForm):
    """The admin's login form with one more field: the authenticator's 6-digit code or a
    backup code. The device is inferred from the code's shape (digits of the TOTP
    device's length: the authenticator; anything else: the backup codes), so only that
    one device records a failed attempt (django-otp's reason for asking for a device)."""

    otp_token = forms.CharField(
        label="Authentication code",
        required=False,
        max_length=32,
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric"}),
        help_text="The 6-digit code of your authenticator app, or one of your backup codes.",
    )
    otp_device = forms.CharField(required=False, widget=forms.HiddenInput)
    otp_challenge = forms.CharField(required=False, widget=forms.HiddenInput)

    otp_error_messages = dict(
        OTPAuthenticationFormMixin.otp_error_messages,
        token_required="Enter the code of your authenticator app (or a backup code).",
        invalid_token="That code is wrong or already used: enter the current one.",
        device_required="That code is wrong or already used: enter the current one.",
    )

    def clean(self):
        self.cleaned_data = super().clean()
        user = self.get_user()
        if user is not None and not any(devices_for_user(user, confirmed=True)):
            raise forms.ValidationError(
                "This staff account has no second factor yet, and the admin requires one. "
                f"An operator enrols an authenticator with `{ENROL_COMMAND}` "
                "(README: Deploying, staff two-factor).",
                code="no_device",
            )
        try:
            self.clean_otp(user)
        except forms.ValidationError:
            # The password was right, the code was not: count it as a failed login
            # (django-axes listens to this signal), so guessing codes locks out too.
            user_login_failed.send(
                sender=__name__,
                credentials={"username": self.cleaned_data.get("username")},
                request=self.request,
            )
            raise
        return self.cleaned_data

    def _chosen_device(self, user):
        token = (self.cleaned_data.get("otp_token") or "").strip()
        self.cleaned_data["otp_token"] = token
        totp = TOTPDevice.objects.filter(user=user, confirmed=True).first()
        if totp is not None and token.isdigit() and len(token) == totp.digits:
            return totp
        return StaticDevice.objects.filter(user=user, confirmed=True).first()

    def _update_form(self, user):
        pass  # no device list on the page: the code's shape picks the device


class StaffAdminSite(admin.AdminSite):
    """Django's admin site; with ADMIN_REQUIRE_2FA on, the login asks for a second factor
    and only a session verified by one (django_otp's middleware sets is_verified) counts
    as staff. Read per request, so tests can turn it on."""

    def __init__(self, name: str = "admin"):
        super().__init__(name)

    @property
    def login_form(self):
        return StaffLoginForm if two_factor_required() else None

    @property
    def login_template(self):
        return "admin/login_2fa.html" if two_factor_required() else None

    def has_permission(self, request):
        if not super().has_permission(request):
            return False
        if not two_factor_required():
            return True
        is_verified = getattr(request.user, "is_verified", None)
        return bool(is_verified and is_verified())


# --- Enrolment and recovery (the staff_2fa command) -------------------------------------


@dataclass(frozen=True)
class Enrolment:
    username: str
    config_url: str  # otpauth://totp/...: what the authenticator app scans
    backup_codes: list[str]


def _staff(username: str):
    user = get_user_model()._default_manager.filter(username=username).first()
    if user is None:
        raise LookupError(f"no user named {username!r}")
    if not user.is_staff:
        raise LookupError(f"{username!r} is not staff: the admin is for staff only")
    return user


def _replace_backup_codes(user, count: int) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=BACKUP_DEVICE_NAME, confirmed=True)
    codes = [StaticToken.random_token() for _ in range(count)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=c) for c in codes)
    return codes


@transaction.atomic
def staff_enrol(username: str, *, backup_codes: int = 10) -> Enrolment:
    """A new authenticator (TOTP) for a staff user, replacing any they had, and a fresh
    set of single-use backup codes. The old authenticator and codes stop working."""
    user = _staff(username)
    TOTPDevice.objects.filter(user=user).delete()
    device = TOTPDevice.objects.create(user=user, name="authenticator", confirmed=True)
    return Enrolment(
        user.get_username(), device.config_url, _replace_backup_codes(user, backup_codes)
    )


@transaction.atomic
def staff_backup_codes(username: str, *, count: int = 10) -> list[str]:
    """A fresh set of backup codes (the old ones stop working)."""
    return _replace_backup_codes(_staff(username), count)


@transaction.atomic
def staff_reset(username: str) -> int:
    """Remove every second factor of a user (a lost phone and lost codes): they cannot
    log in to the admin until enrolled again. Returns the devices removed."""
    user = get_user_model()._default_manager.filter(username=username).first()
    if user is None:
        raise LookupError(f"no user named {username!r}")
    removed = 0
    for model in (TOTPDevice, StaticDevice):
        removed += model.objects.filter(user=user).delete()[1].get(model._meta.label, 0)
    return removed


def staff_status() -> list[tuple[str, bool, int]]:
    """(username, has an authenticator, backup codes left) for every active staff user."""
    users = get_user_model()._default_manager.filter(is_staff=True, is_active=True)
    rows = []
    for user in users.order_by("username"):
        has_totp = TOTPDevice.objects.filter(user=user, confirmed=True).exists()
        codes = StaticToken.objects.filter(device__user=user, device__confirmed=True).count()
        rows.append((user.get_username(), has_totp, codes))
    return rows
