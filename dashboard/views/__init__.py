"""The dashboard's pages: short Streamlit scripts run by ``st.navigation``."""
