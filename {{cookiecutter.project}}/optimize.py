"""python optimize.py data=<data> output_dir=<folder or s3://...>: writes the data as LitData
chunks for data=stream (configs/optimize.yaml)."""

from {{ cookiecutter.package }}.cli import optimize

if __name__ == "__main__":
    optimize()
