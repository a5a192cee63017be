"""The Faust app: topics, wire records and their validation, tables and agents (issue #3).

Agents stay thin: decode, call :func:`memcore.apply`, assign the whole new value, emit effects.
"""
