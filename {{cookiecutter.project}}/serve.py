"""python serve.py model=<export dir> [port=8000] [host=127.0.0.1]: uvicorn, no torch."""

from {{ cookiecutter.package }}.cli import serve

if __name__ == "__main__":
    serve()
