"""Training, evaluation and export for {{ cookiecutter.project }}."""
