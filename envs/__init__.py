"""Environments: one module per family, each configured by conf/env/<name>.yaml."""
