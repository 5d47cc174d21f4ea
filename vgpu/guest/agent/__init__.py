"""The guest agent. Standard library only, Python >= 3.8: it is shipped to guests as one zipapp."""
