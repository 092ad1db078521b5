"""What the bridge offers besides tools, as plain data and functions: resources (kb:// URIs), prompt
templates and argument completions. protocol/content.py adapts them to MCP."""
