from django.core.management.base import BaseCommand, CommandError

from catalog.loader import DEFAULT_CATALOG, CatalogFileError, catalog_load


class Command(BaseCommand):
    help = "Load the built-in model catalog (idempotent: a second run changes nothing)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--file", default=str(DEFAULT_CATALOG), help="Catalog TOML file (default: %(default)s)."
        )
        parser.add_argument(
            "--reset-lifecycle",
            action="store_true",
            help="Also reset lifecycle dates and successors of existing models to the file's "
            "values (recorded in the history). By default they belong to the admins.",
        )

    def handle(self, *args, **options):
        try:
            report = catalog_load(path=options["file"], reset_lifecycle=options["reset_lifecycle"])
        except CatalogFileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(report.summary())
        self.stdout.write(
            self.style.SUCCESS("Catalog loaded.")
            if report.changed
            else "Catalog already up to date."
        )
