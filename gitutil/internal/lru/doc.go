// Package lru holds a bounded map that forgets its least recently used
// entry when it is full: what a long-running process learns of each remote
// and server it talks to, kept on a value and never growing past its bound
// however many it sees.
package lru
