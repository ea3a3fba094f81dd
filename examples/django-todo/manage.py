"""Django's command line for the example: python manage.py migrate."""

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "todosite.settings")
    execute_from_command_line(sys.argv)
