"""What this package writes for people to read: README's and the docs' generated blocks (readme;
`python -m bildlib.reports`, make report) and the model cards (modelcard: every kind in one module,
templates in reports/cards/, measurements in bildlib.bench.models)."""
