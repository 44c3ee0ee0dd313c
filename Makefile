# The two commands of the README. Both run the same idempotent set-up first (scripts/setup.sh).
.PHONY: setup demo test bench lint

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

test: setup
	@bash scripts/test.sh

lint: setup
	@.venv/bin/ruff check . && .venv/bin/ruff format --check .
