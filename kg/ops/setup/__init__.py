"""Writing each agent's configuration files: `kgd hooks install|remove|print` and `kgd desktop`.

Lives here: a person's settings file edited with care (settings_file), kgd's entries in an agent's
hook lists (hook_lists), Claude Code's hooks (claude_hooks), Codex / Gemini / Copilot configuration
(agent_config, with Codex's TOML block in toml_block) and Claude Desktop's entry (desktop).
May import: kg.ops and everything below it; nothing here runs inside the daemon.
"""
