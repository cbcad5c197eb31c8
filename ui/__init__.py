"""The app's parts apart from its layout: request checks, visitor sessions, and rendering of the
lanes.

app.py holds the Gradio layout and the handlers; these modules hold what they call. The engine
(ouroboros_core) never imports from here or from gradio.
"""
