// The console's page behaviour: htmx answers that refuse something (4xx) are swapped
// like any other (the server retargets them to the flash area); a 401 means the
// session ended, so the browser goes to the sign-in page.
document.addEventListener("htmx:beforeSwap", function (evt) {
  const status = evt.detail.xhr.status;
  if (status === 401) {
    window.location.href = "/console/login?next=" + encodeURIComponent(window.location.pathname);
    evt.detail.shouldSwap = false;
  } else if (status >= 400 && status < 500) {
    evt.detail.shouldSwap = true;
    evt.detail.isError = false;
  }
});

