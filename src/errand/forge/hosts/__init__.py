"""The forges errand speaks: GitHub, GitLab, Gitea (and Forgejo), each behind the Forge protocol."""
