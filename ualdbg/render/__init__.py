"""Everything ualdbg shows: break reports, trace tables, the JSON document, SARIF. Renderers
return text or rich renderables; a sink (the adapter, the CLI) prints them."""
