"""The shop database the SQL agent queries: customers, products and their orders, in SQLite.

Built once per process from a fixed seed into a temporary file (the same rows every time), then opened
read-only for each query. ``run(sql)`` executes one query with a step budget, so a runaway query (a model's
accidental cross join) stops with an error instead of hanging a rollout.
"""

from __future__ import annotations

import atexit
import random
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price INTEGER NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    product_id INTEGER NOT NULL REFERENCES products(id),
    qty INTEGER NOT NULL
);
"""
#: the schema as the agent's prompts show it (short: the model is tiny)
TABLES = "customers(id,name,city) products(id,name,category,price) orders(id,customer_id,product_id,qty)"

CITIES = ["Oslo", "Lima", "Rome", "Kyiv", "Pune", "Bern"]
CUSTOMERS = [
    "Ann", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jo", "Kai", "Lea", "Max",
    "Nia", "Oto", "Pia", "Raj", "Sam", "Tia", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe",
]  # fmt: skip
PRODUCTS = {
    "games": ["kite", "drum", "yoyo", "puzzle"],
    "books": ["atlas", "novel", "comic", "diary"],
    "tools": ["saw", "drill", "hammer", "wrench"],
    "snacks": ["jam", "tea", "honey", "nuts"],
}
CATEGORIES = list(PRODUCTS)
N_PRODUCTS = sum(len(names) for names in PRODUCTS.values())
N_ORDERS = 120
MAX_ROWS = 50  # rows fetched per query
MAX_STEPS = 200_000  # SQLite VM steps before a query is stopped

_lock = threading.Lock()
_path: Path | None = None


def build(path: Path, seed: int = 7) -> None:
    """Write the database to ``path``: every customer has orders, prices within a category differ."""
    rng = random.Random(seed)
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA)
        db.executemany(
            "INSERT INTO customers VALUES (?, ?, ?)",
            [(i + 1, name, CITIES[i % len(CITIES)]) for i, name in enumerate(CUSTOMERS)],
        )
        products = []
        for category, names in PRODUCTS.items():
            prices = rng.sample(range(3, 100), len(names))
            for name, price in zip(names, prices, strict=True):
                products.append((len(products) + 1, name, category, price))
        db.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", products)
        buyers = list(range(1, len(CUSTOMERS) + 1))  # everyone orders at least once
        buyers += [rng.randint(1, len(CUSTOMERS)) for _ in range(N_ORDERS - len(buyers))]
        orders = [(i + 1, c, rng.randint(1, len(products)), rng.randint(1, 5)) for i, c in enumerate(buyers)]
        db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", orders)
    db.close()


def path() -> Path:
    """The database file, built on first use (removed when the process exits)."""
    global _path
    with _lock:
        if _path is None:
            directory = Path(tempfile.mkdtemp(prefix="tether-shop-"))
            atexit.register(shutil.rmtree, directory, True)
            build(directory / "shop.db")
            _path = directory / "shop.db"
        return _path


def run(sql: str) -> list[tuple[object, ...]]:
    """The rows of ``sql`` (at most ``MAX_ROWS``); raises ``sqlite3.Error`` for bad or runaway SQL."""
    db = sqlite3.connect(f"file:{path()}?mode=ro", uri=True, check_same_thread=False)
    steps = 0

    def _budget() -> int:
        nonlocal steps
        steps += 1000
        return int(steps > MAX_STEPS)  # non-zero interrupts the query

    db.set_progress_handler(_budget, 1000)
    try:
        return db.execute(sql).fetchmany(MAX_ROWS)
    finally:
        db.close()
