"""What a backup run knows of contents: those the index had before it
started, and those it made (recorded once the run has them all)."""


class ContentLog:
    def __init__(self):
        self.known = set()  # content ids in the index when the run started
        self.new = {}       # content id -> content record, this run

    def begin(self, known) -> None:
        """The run starts: `known` is what the index has."""
        self.known = known

    def __contains__(self, content_id) -> bool:
        return content_id in self.known or content_id in self.new

    def remember(self, content_id, record):
        self.new[content_id] = record
        return content_id
