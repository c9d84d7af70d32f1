"""Agent variants: one module per variant, each configured by conf/variant/<name>.yaml."""
