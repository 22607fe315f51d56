// Package console is the web console `tuft launch` serves at /console (docs/console.md):
// server-rendered pages (html/template) with hand-written JavaScript and CSS embedded in
// the binary, so nothing is fetched from elsewhere at run time and there is no build step.
//
// A user signs in with an API key, which the console keeps server-side; the browser holds
// only a random session token in an HttpOnly, SameSite=Strict cookie. Every read and every
// change the pages make goes through the API's own handler, in process, with that key
// (the /console/api/ forwarder and the pages' own reads): the API's layers authenticate,
// admit and scope each request to the key's tenant exactly as for any client, so the
// console holds no tenant rule of its own. The forwarder passes only an allowlist of routes.
package console
