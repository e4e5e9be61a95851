// The LTI pages' script (no inline scripts: the pages' CSP allows only this file). What each
// page does is said by data attributes on its <body>:
//   data-lti="land"      store the sign-in the launch gave and open the web UI
//   data-lti="login"     keep the login's secret in the platform's storage (LTI client-side
//                        postMessage storage), then go on to the platform's auth endpoint
//   data-lti="recover"   no state cookie came back (third-party cookies blocked): read the
//                        secret back from the platform's storage and post the launch again
//   data-lti="post"      post the form on the page (a deep-linking response to the LMS)
//   data-lti="close"     a dynamic registration ended: tell the LMS to close its dialog
"use strict";

const body = document.body;
const data = body.dataset;

function storageFrame() {
  const target = data.storageTarget || "_parent";
  const frame = target === "_parent" ? window.parent : window.parent.frames[target];
  return frame || window.parent;
}

// One request to the platform's storage; resolves with the response (or null after a wait).
function platformStorage(message, origin, waitMs) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { window.removeEventListener("message", onMessage); resolve(null); }, waitMs);
    function onMessage(event) {
      const reply = event.data;
      if (!reply || reply.message_id !== message.message_id) return;
      if (origin !== "*" && event.origin !== origin) return;
      clearTimeout(timer);
      window.removeEventListener("message", onMessage);
      resolve(reply);
    }
    window.addEventListener("message", onMessage);
    storageFrame().postMessage(message, origin);
  });
}

function messageId() {
  return `lectern-${Date.now()}-${Math.random().toString(36).slice(2)}`;
}

async function login() {
  if (data.storageTarget && window.parent !== window) {
    await platformStorage({ subject: "lti.put_data", message_id: messageId(),
      key: `state_${data.state}`, value: data.secret }, data.platformOrigin, 2000);
  }
  window.location.replace(data.redirect);
}

async function recover() {
  const reply = await platformStorage({ subject: "lti.get_data", message_id: messageId(),
    key: `state_${data.state}` }, data.platformOrigin, 2000);
  const form = document.getElementById("lti-form");
  if (reply && typeof reply.value === "string") {
    form.elements.lti_storage_secret.value = reply.value;
  }
  form.submit();
}

function land() {
  // framed by an LMS that the web UI may not be framed by: the page's link opens it in a new
  // window instead (the sign-in handed over in the URL's fragment)
  if (window.top !== window.self && data.framable !== "true") return;
  sessionStorage.setItem("lectern.token", data.token);
  if (data.classId) sessionStorage.setItem("lectern.class", data.classId);
  if (data.target) sessionStorage.setItem("lectern.target", data.target);
  window.location.replace(data.next || "/");
}

switch (data.lti) {
  case "land": land(); break;
  case "login": login(); break;
  case "recover": recover(); break;
  case "post": document.getElementById("lti-form").submit(); break;
  case "close":
    (window.opener || window.parent).postMessage({ subject: "org.imsglobal.lti.close" }, "*");
    break;
  default: break;
}
