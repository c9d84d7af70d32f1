"""The schema module: Arrow schemas derived from the record models, and Usage arithmetic."""

import re
from pathlib import Path

import pyarrow as pa

from harness.tables.records import SCHEMA_VERSION, TABLES, Episode, LLMCall, Usage


def test_arrow_schema_has_one_column_per_field_in_order():
    for model in TABLES.values():
        assert model.arrow_schema().names == list(model.model_fields)


def test_arrow_types_follow_annotations_and_optionality():
    schema = Episode.arrow_schema()
    assert schema.field("success").type == pa.bool_()
    assert schema.field("stream_position").type == pa.int64()
    assert schema.field("started_at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("error").nullable and not schema.field("task_id").nullable
    assert LLMCall.arrow_schema().field("purpose").type == pa.string()


def test_schema_metadata_names_version_and_table():
    metadata = LLMCall.arrow_schema().metadata
    assert metadata[b"harness.schema_version"] == SCHEMA_VERSION.encode()
    assert metadata[b"harness.table"] == b"llm_calls"


def test_every_field_is_documented():
    for model in TABLES.values():
        undocumented = [name for name, f in model.model_fields.items() if not f.description]
        assert undocumented == [], f"{model.__name__} fields without a docstring: {undocumented}"


def test_usage_sums_and_keeps_unknown_cost_unknown():
    a = Usage(prompt_tokens=3, completion_tokens=2, cost_usd=0.5, latency_s=1.0)
    b = Usage(prompt_tokens=1, completion_tokens=1, cost_usd=0.25, latency_s=0.5)
    total = a + b
    assert (total.prompt_tokens, total.completion_tokens, total.total_tokens) == (4, 3, 7)
    assert total.cost_usd == 0.75 and total.latency_s == 1.5
    assert (a + Usage(cost_usd=None)).cost_usd is None


def test_docs_column_reference_is_generated_from_the_records():
    from pathlib import Path

    from harness.tables.records import columns_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "columns.md").read_text()
    start = page.index("<!-- columns:")
    section = page[page.index("\n", start) + 1:page.index("\n<!-- end of columns -->")]
    assert section == columns_markdown(), \
        "regenerate docs/columns.md from harness.tables.records.columns_markdown()"


def test_the_readmes_table_of_outputs_lists_every_table_of_the_registry():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)/` \|", readme, re.MULTILINE))
    assert listed == set(TABLES), (f"README's Outputs table: add {set(TABLES) - listed}, "
                                   f"drop {listed - set(TABLES)}")
