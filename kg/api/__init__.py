"""What clients call and the text they read (contract sections 3 and 6): no sockets.

Lives here: JSON-RPC framing (jsonrpc), MCP's lifecycle and method table (mcp), the eight kg_* tools
(tools), the REST routes (rest) and their OpenAPI document (openapi), the text an agent reads
(render) and structuredContent bounds (structured).
May import: kg.agents, kg.travel, kg.memory, kg.disk, kg.core, kg.secrets.
"""
