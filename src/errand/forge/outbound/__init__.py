"""What errand sends to a forge: the accepted commit pushed, the pull request and its text."""
