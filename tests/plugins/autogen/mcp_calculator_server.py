"""An MCP calculator server over stdio, as Agent Lightning's calc_x example uses: ``McpWorkbench`` runs it as
a subprocess. Its one tool is the test agents' ``calculator``."""

from __future__ import annotations

from autogen_calc_agent import calculator  # this folder is the script's: first on sys.path
from mcp.server.fastmcp import FastMCP

server = FastMCP("calculator")
server.add_tool(calculator, name="calculator")

if __name__ == "__main__":
    server.run()  # stdio
