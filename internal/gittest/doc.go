// Package gittest runs a real git server over smart HTTP on loopback for
// tests: git http-backend behind net/http/cgi, with optional basic auth, a
// request counter per repository, and helpers that create repositories and
// commits quickly with the git CLI.
package gittest
