// Package deps holds the test that dependencies point down: what a
// program compiles when it imports the library's packages, read from
// `go list` for the small applications under testdata (a Gin application
// on the memory store, with lists built in code, with a watched list
// file), so that a package that pulls a Redis client, a routing table or
// a file watcher into a program that does not use them is caught.
package deps
