// Package api holds the checked-in listing of the module's public API, in
// the manner of Go's own api/ directory: v1.txt has one line for every
// exported name of every public package, sorted, with its signature, so
// that every change to the surface shows up in review as a change to that
// file.
//
// The package has no code. Its test regenerates the listing from the
// source (go/parser and go/ast only: no build, no network) and fails on any
// difference, printing the lines added and removed; a deliberate change is
// accepted with
//
//	go test ./api -update
//
// and the rewritten v1.txt is committed with it. The test also counts the
// exported names of each package by the rules of the API v1 issue and
// checks that the listing has exactly as many lines of each kind, so that
// the listing cannot drift from the count.
//
// The format, one line per name, each line "pkg IMPORTPATH, " then:
//
//	func NAME(PARAMS) RESULTS          exported function
//	method (RECV) NAME(PARAMS) RESULTS exported method of an exported type
//	type NAME KIND                     exported type: struct, interface, or
//	                                   the type it is defined from, as written
//	type NAME = TYPE                   exported type alias
//	type NAME struct, FIELD TYPE       exported field of an exported struct
//	type NAME struct, embedded TYPE    embedded field (exported or not)
//	type NAME interface, METHOD(...)   method of an exported interface
//	type NAME interface, embedded T    embedded interface or type element
//	type NAME interface, unexported methods
//	const NAME [TYPE] = VALUE          exported constant, its value as written,
//	                                   iota replaced by its value
//	var NAME TYPE                      exported variable; without a declared
//	                                   type, the one its initializer gives
//	                                   (errors.New: error), or the test fails
//	                                   asking for one
//
// Parameters and results are types only, names dropped (a renamed
// parameter is no API change); type parameters keep their names. Types
// are printed as the source writes them (context.Context, *Limiter), so a
// change of any signature changes its line. "Public" means every package
// of this module outside internal/, examples/, cmd/ and bench/, and
// outside any directory named internal or testdata or with its own go.mod.
// The embedded and "unexported methods" lines are structure the count
// rules do not count; every other line is one counted name.
package api
