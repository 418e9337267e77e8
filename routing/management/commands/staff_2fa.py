import io

from django.core.management.base import BaseCommand, CommandError

from routing.staffauth import staff_backup_codes, staff_enrol, staff_reset, staff_status


class Command(BaseCommand):
    help = (
        "Staff two-factor for the admin (ADMIN_REQUIRE_2FA; README 'Staff two-factor'): "
        "enrol an authenticator app, print new backup codes, reset a user's second "
        "factors (a lost phone), or list who has what."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        enrol = sub.add_parser(
            "enrol",
            help="A new authenticator (replacing any) and 10 backup codes; prints the "
            "otpauth:// URL and its QR code for the app to scan.",
        )
        enrol.add_argument("username", help="The staff user to enrol.")
        enrol.add_argument("--no-qr", action="store_true", help="Print the URL only.")
        codes = sub.add_parser("backup-codes", help="New single-use backup codes.")
        codes.add_argument("username", help="The staff user to give new backup codes.")
        codes.add_argument(
            "--count", type=int, default=10, help="How many codes (default: %(default)s)."
        )
        reset = sub.add_parser(
            "reset", help="Remove every second factor of a user (enrol them again after)."
        )
        reset.add_argument("username", help="The staff user whose devices to remove.")
        sub.add_parser("status", help="Staff users, their authenticator and backup codes left.")

    def handle(self, *args, **o):
        try:
            getattr(self, "_" + o["action"].replace("-", "_"))(o)
        except LookupError as exc:
            raise CommandError(str(exc.args[0])) from None

    def _enrol(self, o):
        enrolment = staff_enrol(o["username"])
        out = self.stdout.write
        out(f"Authenticator for {enrolment.username} (the previous one, if any, stops working).")
        out("Scan this with the authenticator app (or enter the URL's secret by hand):")
        out(enrolment.config_url)
        if not o["no_qr"]:
            out(_qr_text(enrolment.config_url))
        self._print_codes(enrolment.backup_codes)

    def _backup_codes(self, o):
        if not 1 <= o["count"] <= 50:
            raise CommandError("--count must be between 1 and 50")
        self._print_codes(staff_backup_codes(o["username"], count=o["count"]))

    def _print_codes(self, codes):
        self.stdout.write(
            "Backup codes (each works once, in the code field; keep them offline; "
            "earlier ones stop working):"
        )
        for code in codes:
            self.stdout.write(f"  {code}")

    def _reset(self, o):
        removed = staff_reset(o["username"])
        self.stdout.write(
            f"Removed {removed} second factor(s) of {o['username']}: with ADMIN_REQUIRE_2FA "
            f"on they cannot log in to the admin until `staff_2fa enrol {o['username']}`."
        )

    def _status(self, o):
        for username, has_totp, codes in staff_status():
            app = "authenticator" if has_totp else "NO authenticator"
            self.stdout.write(f"{username}: {app}, {codes} backup code(s) left")


def _qr_text(url: str) -> str:
    import qrcode

    qr = qrcode.QRCode(border=2)
    qr.add_data(url)
    buffer = io.StringIO()
    qr.print_ascii(out=buffer, invert=True)
    return buffer.getvalue()
