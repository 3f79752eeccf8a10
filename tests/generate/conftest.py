from tests.generate.helpers import book, book_path, pipeline  # noqa: F401  (fixtures)
