"""handoffscope dashboard: Streamlit + Plotly over the auditor's figures."""
