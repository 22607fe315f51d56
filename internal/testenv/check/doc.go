// Package check is the leaf of the test kit: golden files and waiting for a condition.
// It imports only the standard library, so the tests of any package may use it;
// internal/testenv itself starts servers, imports nearly the whole module, and so is
// out of reach of the tests of the packages it imports (an import cycle).
package check
